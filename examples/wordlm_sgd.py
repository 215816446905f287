"""A word-level LSTM language model trained with a hand-written SGD update: no torch.optim, no step marker.

The shape of the classic word-level language-model scripts: truncated backpropagation through time over a
batchified corpus, the hidden state detached between chunks, the gradients clipped, the weights updated in
place (`p.data.add_(p.grad, alpha=-lr)`) and the loss read back every iteration with `loss.item()` (SYNC-1).
With no optimizer and no `prof.step()`, a trace of it has no `ProfilerStep` and no `Optimizer.step`: gpudiag
finds its iterations from its backward passes, one per iteration.

    python examples/wordlm_sgd.py --iterations 40 --device cuda
"""

import argparse

import torch
import torch.nn as nn

WORDS = (
    "the quick brown fox jumps over the lazy dog while the cat sleeps on the warm mat and the bird sings in the "
    "old tree near the river where the children play with a red ball under the bright sun of a long summer day"
).split()


def corpus(n_words: int, seed: int = 0) -> tuple[torch.Tensor, int]:
    """A token stream of ``n_words`` words drawn from WORDS with a fixed seed, and the vocabulary size."""
    vocab = sorted(set(WORDS))
    g = torch.Generator().manual_seed(seed)
    picks = torch.randint(0, len(WORDS), (n_words,), generator=g)
    ids = torch.tensor([vocab.index(WORDS[i]) for i in picks.tolist()], dtype=torch.long)
    return ids, len(vocab)


def batchify(ids: torch.Tensor, batch: int) -> torch.Tensor:
    """(length, batch) columns of the token stream, the tail that does not fill a column dropped."""
    n = ids.numel() // batch
    return ids[: n * batch].view(batch, n).t().contiguous()


class WordLM(nn.Module):
    def __init__(self, vocab: int, width: int, layers: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.rnn = nn.LSTM(width, width, layers)
        self.head = nn.Linear(width, vocab)

    def forward(self, x, hidden):
        out, hidden = self.rnn(self.embed(x), hidden)
        return self.head(out), hidden

    def initial_hidden(self, batch: int):
        weight = next(self.parameters())
        shape = (self.rnn.num_layers, batch, self.rnn.hidden_size)
        return weight.new_zeros(shape), weight.new_zeros(shape)


def train(model, data, iterations: int, bptt: int = 35, lr: float = 20.0, clip: float = 0.25, hidden=None):
    """``iterations`` chunks of truncated BPTT with a hand-written SGD update; the hidden state it ends with."""
    hidden = model.initial_hidden(data.size(1)) if hidden is None else hidden
    for i in range(iterations):
        start = (i * bptt) % (data.size(0) - bptt - 1)
        x, y = data[start : start + bptt], data[start + 1 : start + 1 + bptt]
        hidden = tuple(h.detach() for h in hidden)
        model.zero_grad()
        logits, hidden = model(x, hidden)
        loss = nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        with torch.no_grad():
            for p in model.parameters():
                p.data.add_(p.grad, alpha=-lr)
        print(f"iteration {i} loss {loss.item():.3f}")  # SYNC-1
    return hidden


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--iterations", type=int, default=40)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    args = parser.parse_args()
    torch.manual_seed(0)
    ids, vocab = corpus(20_000)
    data = batchify(ids, args.batch).to(args.device)
    model = WordLM(vocab, args.width, args.layers).to(args.device)
    train(model, data, args.iterations)


if __name__ == "__main__":
    main()
