"""A model of one inference replica's prefix (KV) cache, for the mock judge and the simulator.

vLLM's automatic prefix caching and SGLang's radix cache keep the KV of past
prompts in fixed-size blocks keyed by a hash chained over the prompt's blocks;
a new request whose leading blocks are cached skips their prefill.  vLLM V1
registers a block's hash when it schedules the block, so requests scheduled
right after (a GRPO group sent at once) already hit it.  This model keeps:

* blocks of ``block_chars`` characters (16 tokens of about 4 characters), each
  keyed by a hash chained over the blocks before it, in an LRU of ``blocks``
  entries (the KV cache's size; the least recently used block is evicted);
* ``serve(text)``: the prompt's leading cached blocks are hits; every block of
  it is then cached (the most recently used); the prefill time is
  ``prefill_s_per_token`` times the prompt tokens that missed (characters / 4).

So a replica's latency for a request is prefill (of what missed) + decode
(drawn by the caller).  Units: seconds, tokens, characters.  Not thread-safe:
the caller holds its lock.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

__all__ = ["CHARS_PER_TOKEN", "PrefixCache"]

CHARS_PER_TOKEN = 4


@dataclass
class PrefixCache:
    blocks: int = 4096  # KV cache size, in blocks
    prefill_s_per_token: float = 0.0002
    block_chars: int = 64
    lru: OrderedDict = field(default_factory=OrderedDict)
    stats: dict = field(default_factory=lambda: {"prompts": 0, "prompt_tokens": 0, "hit_tokens": 0, "hits": 0})

    def serve(self, text: str) -> float:
        """Prefill seconds for ``text``, after its leading cached blocks; caches all its blocks."""
        h, hit_chars, hitting = 0, 0, True
        lru = self.lru
        for start in range(0, len(text), self.block_chars):
            block = text[start:start + self.block_chars]
            h = hash((h, block))
            if hitting and h in lru:
                hit_chars += len(block)
                lru.move_to_end(h)
                continue
            hitting = False
            lru[h] = None
        while len(lru) > self.blocks:
            lru.popitem(last=False)
        st = self.stats
        tokens, hit = len(text) / CHARS_PER_TOKEN, hit_chars / CHARS_PER_TOKEN
        st["prompts"] += 1
        st["prompt_tokens"] += tokens
        st["hit_tokens"] += hit
        st["hits"] += hit_chars > 0
        return self.prefill_s_per_token * (tokens - hit)

    def hit_rate(self) -> float:
        """Prompt tokens served from the cache / prompt tokens (vLLM's prefix cache hit rate)."""
        return self.stats["hit_tokens"] / self.stats["prompt_tokens"] if self.stats["prompt_tokens"] else 0.0
