# The Python prefetch module (tools/python/fanstore_prefetch.py) speaks the wire protocol from its own constants:
# check each one against fanstore/protocol/include/fanstore/protocol/daemon_wire.hpp and the Code enum, so a
# protocol change that forgets the module fails here. Also checks its "{node}" expansion. Usage: ROOT
import os
import re
import struct
import sys

root = sys.argv[1]
sys.path.insert(0, os.path.join(root, "tools", "python"))
import fanstore_prefetch as fp  # noqa: E402

wire = open(os.path.join(root, "fanstore/protocol/include/fanstore/protocol/daemon_wire.hpp")).read()
status = open(os.path.join(root, "fanstore/include/fanstore/status.hpp")).read()


def constant(name):
    m = re.search(r"inline constexpr \w+ %s = ([^;]+);" % name, wire)
    assert m, "daemon_wire.hpp has no constant " + name
    return eval(m.group(1).replace("ull", "").replace("u << ", " << ").replace("u;", ""), {})


msg_types = dict(re.findall(r"(k\w+) = (\d+)", wire[wire.index("enum class MsgType"):wire.index("};", wire.index("enum class MsgType"))]))
codes = re.findall(r"^\s+(k\w+)[ ,=]", status[status.index("enum class Code"):status.index("};", status.index("enum class Code"))], re.M)
pairs = [
    ("request magic", fp._REQUEST_MAGIC, constant("kRequestMagic")),
    ("reply magic", fp._REPLY_MAGIC, constant("kReplyMagic")),
    ("version", fp._VERSION, constant("kVersion")),
    ("prefetch type", fp._PREFETCH, int(msg_types["kPrefetch"])),
    ("append flag", fp._APPEND, constant("kAppend")),
    ("largest body", fp._MAX_BODY, constant("kMaxPrefetchBody")),
    ("request header size", fp._REQ.size, constant("kRequestSize")),
    ("reply header size", fp._REP.size, constant("kReplyHeaderSize")),
    ("prefetch reply size", fp._PREFETCH_REPLY_SIZE, constant("kPrefetchReplySize")),
    ("kPermission", fp._PERMISSION, codes.index("kPermission")),
]
bad = [f"{what}: module {mine!r}, protocol {theirs!r}" for what, mine, theirs in pairs if mine != theirs]
for line in bad:
    print("MISMATCH " + line)
assert not bad, "tools/python/fanstore_prefetch.py disagrees with daemon_wire.hpp"

os.environ["SLURMD_NODENAME"] = "n17"
assert fp.expand_node("/tmp/{node}/fanstore.sock") == "/tmp/n17/fanstore.sock"
assert fp.expand_node("/tmp/plain.sock") == "/tmp/plain.sock"
os.environ["SLURMD_NODENAME"] = "a/b"
try:
    fp.expand_node("/tmp/{node}.sock")
    raise AssertionError("a node name with '/' was accepted")
except ValueError:
    pass
print("check_prefetch_wire: %d constants agree; {node} expands like the C++ clients" % len(pairs))
