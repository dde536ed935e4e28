# torch.optim reference for test_optim_torch.cpp: same start weights and gradients, prints final weights.
import math
import sys

try:
    import torch
except ImportError:
    sys.exit(77)  # the C++ test reports a loud SKIP

kind = sys.argv[1]
n_weight, n_bias, steps = 6, 2, 5
w = torch.tensor([0.5 - 0.1 * i for i in range(n_weight)], dtype=torch.float32).reshape(2, 3).requires_grad_()
b = torch.tensor([0.5 - 0.1 * i for i in range(n_weight, n_weight + n_bias)], dtype=torch.float32).requires_grad_()
if kind == "sgd":
    opt = torch.optim.SGD([w, b], lr=0.1, momentum=0.9, weight_decay=0.01)
elif kind == "nesterov":
    opt = torch.optim.SGD([w, b], lr=0.1, momentum=0.9, weight_decay=0.01, nesterov=True)
elif kind == "adam":
    opt = torch.optim.Adam([w, b], lr=0.01, weight_decay=0.01)
else:
    sys.exit(2)
for s in range(1, steps + 1):
    grads = [math.sin(0.7 * i + s) for i in range(n_weight + n_bias)]
    w.grad = torch.tensor(grads[:n_weight], dtype=torch.float32).reshape(2, 3)
    b.grad = torch.tensor(grads[n_weight:], dtype=torch.float32)
    opt.step()
print(" ".join("%.9g" % v for v in torch.cat([w.detach().flatten(), b.detach()]).tolist()))
