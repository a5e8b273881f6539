"""A MindSpore training script as users write them: GRAPH_MODE (or PyNative: argv[1]),
TrainOneStepCell, 2 steps (argv[2]); netparity run must see its graph-compiled kernels unchanged."""

import sys

import mindspore as ms
import numpy as np
from mindspore import nn

mode = sys.argv[1] if len(sys.argv) > 1 else "graph"
ms.set_context(mode=ms.GRAPH_MODE if mode == "graph" else ms.PYNATIVE_MODE)
ms.set_seed(0)


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Dense(4, 8)
        self.act = nn.Tanh()
        self.fc2 = nn.Dense(8, 2)

    def construct(self, x):
        return self.fc2(self.act(self.fc1(x)))


net = Net()
loss = nn.WithLossCell(net, nn.MSELoss())
opt = nn.SGD(net.trainable_params(), learning_rate=0.1)
step = nn.TrainOneStepCell(loss, opt)
x = ms.Tensor(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4))
y = ms.Tensor(np.zeros((3, 2), np.float32))
for _ in range(int(sys.argv[2]) if len(sys.argv) > 2 else 2):
    print(float(step(x, y).asnumpy()))
