"""A run's budget: how many model requests and tool calls one run may make.

A model that loops (calling a tool, reading the result, calling it again, forever) would
otherwise run up its endpoint's bill and hold its session until someone notices. Each run
gets a fresh ``Meter``; the actor charges it before every model request and every tool call,
and the first charge over a limit ends the run, interrupted with a reason that names the
budget and the config key that sets it. The session then stays idle (its mail kept) until
new input wakes it: re-queued, the same loop would only start again. A limit of 0 disables
that budget.
"""

from __future__ import annotations

import attrs

__all__ = ["DEFAULT_MAX_MODEL_REQUESTS", "DEFAULT_MAX_TOOL_CALLS", "Budget", "Meter"]

# Generous: a real task takes tens of requests; a loop reaches these in minutes.
DEFAULT_MAX_MODEL_REQUESTS = 200
DEFAULT_MAX_TOOL_CALLS = 400


@attrs.frozen
class Budget:
    """The limits of one run (``[runs]`` in the daemon's config); 0 means no limit."""

    max_model_requests: int = attrs.field(default=DEFAULT_MAX_MODEL_REQUESTS,
                                          validator=attrs.validators.ge(0))
    max_tool_calls: int = attrs.field(default=DEFAULT_MAX_TOOL_CALLS,
                                      validator=attrs.validators.ge(0))


class Meter:
    """What one run has spent of its budget."""

    def __init__(self, budget: Budget) -> None:
        self.budget = budget
        self.model_requests = 0
        self.tool_calls = 0

    def model_request(self) -> str | None:
        """Charge a model request about to be made; the reason to end the run instead when
        the budget is spent."""
        limit = self.budget.max_model_requests
        if limit and self.model_requests >= limit:
            return _spent(limit, "model request", "max_model_requests")
        self.model_requests += 1
        return None

    def tool_call(self) -> str | None:
        """Charge a tool call about to be run; the reason to end the run instead when the
        budget is spent."""
        limit = self.budget.max_tool_calls
        if limit and self.tool_calls >= limit:
            return _spent(limit, "tool call", "max_tool_calls")
        self.tool_calls += 1
        return None


def _spent(limit: int, what: str, key: str) -> str:
    plural = "" if limit == 1 else "s"
    return (f"run budget exhausted: the run made {limit} {what}{plural}, its limit ([runs] "
            f"{key}); raise it in config.toml (0: no limit), then give the session new input")
