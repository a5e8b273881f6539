"""A PyTorch training script with ``torch.compile``, unchanged, for ``netparity run``."""

import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
compiled = torch.compile(model)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loss_fn = torch.nn.MSELoss()
for _ in range(2):
    opt.zero_grad()
    loss = loss_fn(compiled(torch.ones(4, 8)), torch.zeros(4, 4))
    loss.backward()
    opt.step()
    print(float(loss))
