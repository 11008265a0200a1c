"""What must not go on forever in a run: failed steps, empty or tool-less replies, and the same
tool calls again and again. The loop asks the guard after every reply and ends the run when
it says ``stop``."""

from __future__ import annotations

from dataclasses import dataclass

from .budget import Limits


@dataclass
class Guard:
    """Counts what must not go on forever: failed steps, empty or tool-less replies, and the
    same tool calls again and again."""

    limits: Limits
    failures: int = 0
    empty: int = 0
    text_only: int = 0
    repeats: int = 0
    last: tuple[tuple[str, str], ...] = ()

    def calls(self, signature: tuple[tuple[str, str], ...]) -> str:
        """run | block (the model is told, the calls do not run) | stop."""
        self.empty = self.text_only = 0
        self.repeats = self.repeats + 1 if signature == self.last else 1
        self.last = signature
        if self.repeats > self.limits.max_repeats:
            return "stop"
        return "block" if self.repeats == self.limits.max_repeats else "run"

    def no_calls(self, empty: bool) -> str:
        """A reply without tool calls: nudge once, stop on the second in a row."""
        self.last, self.repeats = (), 0
        if empty:
            self.empty += 1
            return "stop" if self.empty >= 2 else "nudge"
        self.text_only += 1
        return "stop" if self.text_only >= 2 else "nudge"

    def step_done(self, failed: bool) -> bool:
        """Record a step; True when the consecutive-failure limit is reached."""
        self.failures = self.failures + 1 if failed else 0
        return self.failures >= self.limits.max_consecutive_failures
