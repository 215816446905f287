"""A dataset whose items take ``delay_s`` each to make: the eval_* scripts' training and evaluation loaders."""

import time

import torch
from torch.utils.data import Dataset


class Items(Dataset):
    def __init__(self, n, delay_s):
        self.n, self.delay_s = n, delay_s

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        time.sleep(self.delay_s)
        return torch.full((16,), float(i))
