"""``qworker mock-judge``: run ``qworker.testing.MockJudge`` as a process, configured from the command line."""

from __future__ import annotations

import math
import os
import sys
from typing import Optional

from ..testing.mockjudge import DEFAULT_PORT, MockJudge
from .args import Parser, bool_flag, tcp_port

__all__ = ["main"]

def main(argv: Optional[list[str]] = None) -> int:
    ap = Parser(prog="qworker mock-judge", description="An OpenAI-compatible mock judge on 127.0.0.1.")
    ap.add_argument("--port", type=tcp_port, default=DEFAULT_PORT, help="TCP port on 127.0.0.1 (0: any free port); 18600 is "
                    "the one configs/demo-judge.yaml names, clear of the quick start's --http 8000")
    ap.add_argument("--capacity", type=int, default=64, help="requests served at once; more get 429 (or wait, with --queue)")
    bool_flag(ap, "queue", help="never refuse: queue beyond --capacity, served in order (vLLM-like)")
    ap.add_argument("--latency", type=float, default=0.2, help="seconds per served request (the mean, for lognormal)")
    ap.add_argument("--latency-dist", choices=("fixed", "lognormal", "per-token"), default="fixed", help="how latency is drawn")
    ap.add_argument("--sigma", type=float, default=0.6, help="lognormal spread (of latency, or of output tokens for per-token)")
    ap.add_argument("--per-token", type=float, default=0.002, help="per-token: seconds per output token")
    ap.add_argument("--ttft", type=float, default=0.02, help="per-token: seconds before the first token")
    ap.add_argument("--tokens-mean", type=int, default=150, help="per-token: mean output tokens")
    ap.add_argument("--rpm", type=float, help="requests per minute (token bucket, 1 s burst); more get 429")
    ap.add_argument("--tpm", type=float, help="tokens per minute (token bucket, 1 s burst); more get 429")
    ap.add_argument("--retry-after", choices=("ms", "seconds", "date", "none"), default="ms", help="the form of Retry-After on a 429")
    ap.add_argument("--ratelimit-headers", choices=("none", "openai", "anthropic"), default="none",
                    help="send rate-limit headers in this provider's spelling")
    ap.add_argument("--p-error", type=float, default=0.0, help="probability of an injected error status")
    ap.add_argument("--error-status", type=int, default=500, help="the injected error's status (e.g. 503)")
    ap.add_argument("--p-reset", type=float, default=0.0, help="probability of a connection reset instead of an answer")
    ap.add_argument("--p-hang", type=float, default=0.0, help="probability of never answering")
    ap.add_argument("--api-key-env", help="require the key in this environment variable")
    ap.add_argument("--prefix-blocks", type=int, default=0, help="a prefix cache of this many 64-character blocks (0: none)")
    ap.add_argument("--prefill-per-token", type=float, default=0.0002, help="prefix cache: seconds of prefill per prompt token that missed")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random draws")
    args = ap.parse_args(argv)
    for flag, value, low, high in (
        ("--capacity", args.capacity, 1, None), ("--latency", args.latency, 0, None), ("--sigma", args.sigma, 0, None),
        ("--per-token", args.per_token, 0, None), ("--ttft", args.ttft, 0, None), ("--tokens-mean", args.tokens_mean, 1, None),
        ("--rpm", args.rpm, 1e-9, None), ("--tpm", args.tpm, 1e-9, None), ("--p-error", args.p_error, 0, 1),
        ("--p-reset", args.p_reset, 0, 1), ("--p-hang", args.p_hang, 0, 1), ("--prefix-blocks", args.prefix_blocks, 0, None),
        ("--prefill-per-token", args.prefill_per_token, 0, None),
    ):
        if value is not None and not (low <= value <= (high if high is not None else math.inf)):
            bound = f"between {low} and {high}" if high is not None else ("above 0" if 0 < low < 1 else f"at least {low}")
            ap.error(f"{flag} must be {bound}, got {value}")

    key = os.environ.get(args.api_key_env) if args.api_key_env else None
    try:
        server = MockJudge(
            port=args.port, capacity=args.capacity, latency_s=args.latency, rpm=args.rpm, tpm=args.tpm, p_error=args.p_error,
            error_status=args.error_status, p_reset=args.p_reset, p_hang=args.p_hang, api_key=key, seed=args.seed, queue=args.queue,
            latency_dist=args.latency_dist, sigma=args.sigma, ttft_s=args.ttft, per_token_s=args.per_token, tokens_mean=args.tokens_mean,
            retry_after=args.retry_after, ratelimit_headers=args.ratelimit_headers, prefix_blocks=args.prefix_blocks,
            prefill_per_token_s=args.prefill_per_token,
        )
    except OSError as exc:  # a busy port, most often
        print(f"qworker mock-judge: cannot listen on 127.0.0.1:{args.port}: {exc.strerror}; pick another --port", file=sys.stderr)
        return 2
    print(f"mock judge on {server.url} (capacity {args.capacity}{' queued' if args.queue else ''}, latency {args.latency} s "
          f"{args.latency_dist}, rpm {args.rpm}, tpm {args.tpm}); stats at /stats, load at /metrics", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        return 130
    return 0
