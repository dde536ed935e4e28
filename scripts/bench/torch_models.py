#!/usr/bin/python3
"""PyTorch twins of fanstore-train's models (ResNet-50, CosmoFlow, 3D U-Net) and a samples/s benchmark.

Prints one line per (model, mode): `model,mode,batch,input_size,threads,samples_per_s`.
Training = forward + loss + backward + SGD step; inference = forward under no_grad, eval mode.
On a GPU (--device cuda, the GPU check's part d): --precision bf16 is autocast bf16 with channels-last
activations and weights, as fanstore-train's bf16 runs them; timings synchronise the device.
"""
import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision


class CosmoFlow(nn.Module):
    """MLPerf HPC CosmoFlow: 5 x [Conv3d k3 'same' -> LeakyReLU(0.3) -> MaxPool 2], filters 32..512, dense 128-64-4."""

    def __init__(self, input_size=128, in_channels=4):
        super().__init__()
        layers, c = [], in_channels
        for i in range(5):
            out = 32 << i
            layers += [nn.Conv3d(c, out, 3, padding=1), nn.LeakyReLU(0.3), nn.MaxPool3d(2)]
            c = out
        self.features = nn.Sequential(*layers)
        flat = c * (input_size // 32) ** 3
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(flat, 128), nn.LeakyReLU(0.3),
                                  nn.Linear(128, 64), nn.LeakyReLU(0.3), nn.Linear(64, 4))

    def forward(self, x):
        return torch.tanh(self.head(self.features(x))) * 1.2


def conv_block(cin, cout, stride):
    # MLPerf U-Net block: Conv3d k3 (stride 2 to downsample) -> InstanceNorm (affine) -> ReLU.
    return nn.Sequential(nn.Conv3d(cin, cout, 3, stride=stride, padding=1, bias=False),
                         nn.InstanceNorm3d(cout, affine=True), nn.ReLU(inplace=True))


class UNet3D(nn.Module):
    """MLPerf KiTS19 3D U-Net: filters 32/64/128/256/320, strided-conv down, transposed-conv up, skip concat."""

    def __init__(self, in_channels=1, classes=3):
        super().__init__()
        f = [32, 64, 128, 256, 320]
        self.inp = nn.Sequential(conv_block(in_channels, f[0], 1), conv_block(f[0], f[0], 1))
        self.down = nn.ModuleList(nn.Sequential(conv_block(f[i], f[i + 1], 2), conv_block(f[i + 1], f[i + 1], 1))
                                  for i in range(4))
        self.bottleneck = nn.Sequential(conv_block(f[4], f[4], 2), conv_block(f[4], f[4], 1))
        ups = [(f[4], f[4])] + [(f[i + 1], f[i]) for i in reversed(range(4))]
        self.up_t = nn.ModuleList(nn.ConvTranspose3d(cin, cout, 2, stride=2) for cin, cout in ups)
        self.up_c = nn.ModuleList(nn.Sequential(conv_block(2 * cout, cout, 1), conv_block(cout, cout, 1))
                                  for _, cout in ups)
        self.out = nn.Conv3d(f[0], classes, 1)

    def forward(self, x):
        skips = [self.inp(x)]
        for d in self.down:
            skips.append(d(skips[-1]))
        x = self.bottleneck(skips[-1])
        for t, c, skip in zip(self.up_t, self.up_c, reversed(skips)):
            x = c(torch.cat([t(x), skip], dim=1))
        return self.out(x)


def build(model, s, batch):
    """Returns (module, input, target, loss_fn) at batch `batch` and spatial size `s`, on the CPU."""
    if model == "resnet50":
        m = torchvision.models.resnet50()
        return m, torch.randn(batch, 3, s, s), torch.randint(0, 1000, (batch,)), F.cross_entropy
    if model == "cosmoflow":
        return CosmoFlow(s), torch.randn(batch, 4, s, s, s), torch.randn(batch, 4), F.mse_loss
    if model == "unet3d":
        return UNet3D(), torch.randn(batch, 1, s, s, s), torch.randint(0, 3, (batch, s, s, s)), F.cross_entropy
    raise SystemExit(f"torch_models: unknown model {model}")


def bench(model, mode, batch, s, iters, warmup, device="cpu", precision="fp32"):
    m, x, y, loss_fn = build(model, s, batch)
    m, x, y = m.to(device), x.to(device), y.to(device)
    half = precision == "bf16"
    if half:  # channels-last, as fanstore-train keeps bf16 activations
        fmt = torch.channels_last if x.dim() == 4 else torch.channels_last_3d
        m, x = m.to(memory_format=fmt), x.contiguous(memory_format=fmt)
    cast = torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=half)
    if mode == "infer":
        m.eval()

        def step():
            with cast:
                m(x)
        ctx = torch.no_grad()
    else:
        m.train()
        opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)

        def step():
            opt.zero_grad(set_to_none=True)
            with cast:
                loss = loss_fn(m(x).float(), y)
            loss.backward()
            opt.step()
        ctx = torch.enable_grad()
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    with ctx:
        for _ in range(warmup):
            step()
        sync()
        start = time.perf_counter()
        for _ in range(iters):
            step()
        sync()
        seconds = time.perf_counter() - start
    return batch * iters / seconds


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", action="append", required=True, help="resnet50, cosmoflow, unet3d; repeatable")
    p.add_argument("--mode", action="append", default=None, help="train, infer; repeatable (default both)")
    p.add_argument("--batch", type=int, action="append", help="per --model, in order")
    p.add_argument("--input-size", type=int, action="append", help="per --model, in order")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--iters", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--precision", default="fp32", help="fp32, or bf16 (autocast, channels-last)")
    a = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(a.threads)
    modes = a.mode or ["train", "infer"]
    defaults = {"resnet50": (8, 224), "cosmoflow": (2, 128), "unet3d": (1, 128)}
    for i, model in enumerate(a.model):
        batch = a.batch[i] if a.batch and i < len(a.batch) else defaults[model][0]
        s = a.input_size[i] if a.input_size and i < len(a.input_size) else defaults[model][1]
        for mode in modes:
            rate = bench(model, mode, batch, s, a.iters, a.warmup, a.device, a.precision)
            print(f"{model},{mode},{batch},{s},{a.threads},{rate:.3f}", flush=True)


if __name__ == "__main__":
    main()
