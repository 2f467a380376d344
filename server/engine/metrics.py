"""b10621's server_metrics: cumulative counters since start, two buckets reset at every scrape (the gauges are
averaged over the window between two scrapes), read by GET /metrics (api/metrics.py renders them)."""

from __future__ import annotations

import dataclasses
import threading
import time
from dataclasses import dataclass, field


@dataclass
class Bucket:
    count: int = 0  # tokens
    steps: int = 0  # decode steps (the first generated token comes free with the prompt's logits)
    time_us: int = 0

    def add(self, n: int, steps: int, t_us: int) -> None:
        self.count += n
        self.steps += steps
        self.time_us += t_us

    def per_second(self) -> float:
        return self.steps / self.time_us * 1e6 if self.time_us > 0 else 0.0


@dataclass
class ServerMetrics:
    # b10621's t_start is ggml_time_us(): CLOCK_MONOTONIC in microseconds, what Process-Start-Time-Unix carries
    t_start: int = field(default_factory=lambda: time.monotonic_ns() // 1000)
    prompt: Bucket = field(default_factory=Bucket)
    predict: Bucket = field(default_factory=Bucket)
    prompt_bucket: Bucket = field(default_factory=Bucket)
    predict_bucket: Bucket = field(default_factory=Bucket)
    n_prompt_cached: int = 0
    n_tokens_max: int = 0
    n_decode: int = 0
    n_busy_slots: int = 0
    n_draft_tokens: int = 0
    n_draft_accepted: int = 0
    n_draft_verif_steps: int = 0
    n_accepted_per_pos: list = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add_prompt(self, n: int, t_us: int) -> None:
        with self.lock:
            self.prompt.add(n, n, t_us)
            self.prompt_bucket.add(n, n, t_us)

    def add_prompt_cached(self, n: int) -> None:
        with self.lock:
            self.n_prompt_cached += n

    def post_decode(self, n_busy: int, slot_tokens: list[int]) -> None:
        """One llama_decode(): the slots processing in it, and every slot's token count."""
        with self.lock:
            self.n_decode += 1
            self.n_busy_slots += n_busy
            self.n_tokens_max = max([self.n_tokens_max, *slot_tokens])

    def on_prediction(self, n_gen: int, t_gen_us: int) -> None:
        steps = n_gen - 1 if n_gen > 0 else 0
        with self.lock:
            self.predict.add(n_gen, steps, t_gen_us)
            self.predict_bucket.add(n_gen, steps, t_gen_us)

    def on_drafts(self, n_draft: int, n_accepted: int, n_rounds: int, per_pos: list[int]) -> None:
        """A finished request's speculative counts (b10621's metrics_on_prediction)."""
        with self.lock:
            self.n_draft_tokens += n_draft
            self.n_draft_accepted += n_accepted
            self.n_draft_verif_steps += n_rounds
            if len(self.n_accepted_per_pos) < len(per_pos):
                self.n_accepted_per_pos += [0] * (len(per_pos) - len(self.n_accepted_per_pos))
            for i, n in enumerate(per_pos):
                self.n_accepted_per_pos[i] += n

    def take(self) -> ServerMetrics:
        """A copy of the figures, then the buckets start over (b10621's metrics_reset_bucket)."""
        with self.lock:
            reading = dataclasses.replace(
                self,
                prompt=dataclasses.replace(self.prompt),
                predict=dataclasses.replace(self.predict),
                n_accepted_per_pos=list(self.n_accepted_per_pos),
                lock=threading.Lock(),
            )
            self.prompt_bucket, self.predict_bucket = Bucket(), Bucket()
        return reading
