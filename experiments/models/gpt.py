"""A GPT-style PyTorch model file (`moplace profile experiments/models/gpt.py`): token and
position embeddings, pre-norm blocks of multi-head attention and a 4h MLP, an untied head,
AdamW. By default 52 M parameters (hidden 512, 8 heads, 6 layers, sequence 512, a 32,000-token
vocabulary, FP32); the environment variable ``GPT_DIMS`` ("hidden,heads,layers,sequence,
vocabulary[,bf16]") sets another size, so one file serves the tests' tiny model and a
billions-of-parameters one traced without memory."""

import os

import torch
from torch import nn

H, A, L, S, V = (int(v) for v in os.environ.get("GPT_DIMS", "512,8,6,512,32000").split(",")[:5])
DTYPE = {"fp32": torch.float32, "bf16": torch.bfloat16}[
    (os.environ.get("GPT_DIMS", "") + ",,,,,fp32").split(",")[5] or "fp32"]


class Block(nn.Module):
    def __init__(self, h, a):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(h), nn.LayerNorm(h)
        self.attn = nn.MultiheadAttention(h, a, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(h, 4 * h), nn.GELU(), nn.Linear(4 * h, h))

    def forward(self, x):
        y = self.ln1(x)
        x = x + self.attn(y, y, y, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb, self.pos = nn.Embedding(V, H), nn.Embedding(S, H)
        self.blocks = nn.Sequential(*[Block(H, A) for _ in range(L)])
        self.head = nn.Linear(H, V, bias=False)

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        return self.head(self.blocks(self.emb(idx) + self.pos(pos)))


def loss(logits, y):
    return nn.functional.cross_entropy(logits.flatten(0, 1).float(), y.flatten())


def build(batch_size):
    model = GPT().to(DTYPE)
    idx = torch.randint(0, V, (batch_size, S))
    y = torch.randint(0, V, (batch_size, S))
    return model, loss, torch.optim.AdamW(model.parameters()), (idx, y)
