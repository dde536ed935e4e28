# Compares the parameters (and BN buffers) of two fanstore-train checkpoints: prints the max abs
# difference; exit 1 when it exceeds the tolerance. Format: docs/training.md "Checkpoint format".
import array
import struct
import sys


def read(path):
    data = open(path, "rb").read()
    assert data[:8] == b"FSTRCKPT", path + ": bad magic"
    (version,) = struct.unpack_from("<I", data, 8)
    pos = 12  # magic + u32 version

    def u64():
        nonlocal pos
        (v,) = struct.unpack_from("<Q", data, pos)
        pos += 8
        return v

    def string():
        nonlocal pos
        n = u64()
        pos += n
        return data[pos - n:pos]

    def floats():
        nonlocal pos
        n = u64()
        a = array.array("f")
        a.frombytes(data[pos:pos + 4 * n])
        pos += 4 * n
        return a

    string(), u64()  # model, table signature
    if version >= 4:
        for _ in range(u64()):  # layer shapes: name, rank, dims
            string()
            for _ in range(u64()):
                u64()
    string()  # optimizer
    position = [u64() for _ in range(6)]
    if version >= 3:
        u64()  # learning-rate scale (f64 bits)
    u64()  # optimizer steps
    return position, floats(), floats()


pa, wa, ba = read(sys.argv[1])
pb, wb, bb = read(sys.argv[2])
tolerance = float(sys.argv[3])
assert len(wa) == len(wb)
diff = max(abs(x - y) for x, y in zip(wa, wb))
scale = max(abs(x) for x in wa)
print("steps %d vs %d, parameters %d, max |diff| %.3g (max |w| %.3g), tolerance %.3g" % (pa[0], pb[0], len(wa), diff, scale, tolerance))
sys.exit(0 if diff <= tolerance and pa[0] == pb[0] else 1)
