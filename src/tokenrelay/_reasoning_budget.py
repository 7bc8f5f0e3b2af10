"""A thinking budget, enforced where tokens are sampled: the engine writes the closing tag itself (issue 31 §2).

A request may cap its reasoning (the Messages API's ``thinking.budget_tokens``, ``tokenrelay serve
--reasoning-budget``; ``0`` is thinking turned off). The engines that sample here (the embedded llama.cpp
engine) run a :class:`ReasoningBudget` per request beside its sampler: each sampled token goes through
:meth:`ReasoningBudget.next`, which counts the tokens sampled inside reasoning and, when the next one would
pass the budget, hands back the closing tag's token ids instead, one per step, so the model then answers (as
llama-server's ``--reasoning-budget`` does). The reply's text then holds the closing tag like any other, and
the reply's own reasoning splitter (``_reasoning``) reads it: the splitter and the budget never disagree on
where the answer starts, because the budget ends reasoning only by writing that tag.

Where the reasoning is: a reply that starts inside it (``ReplyStart`` ``"reasoning"``) from its first token;
one that may open it (``"tag"``) once its text, leading whitespace aside, begins with the opening tag (it is
answer as soon as it cannot); ``"answer"`` never. The model's own closing tag ends the count: what follows is
answer, never cut. Token text comes from the caller (``piece``), so this module holds no tokenizer.

Standard library only. ``next`` is the incremental call; the object ends with the reply (no ``finish``: a
budget has nothing to flush).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ._reasoning import ReasoningFormat, ReplyStart

__all__ = ["ReasoningBudget"]

_WS = " \t\r\n"


class ReasoningBudget:
    """Sampled ids in, the ids to use out: the sampled one, or the closing tag's once the budget is spent."""

    __slots__ = ("_budget", "_closing", "_count", "_fmt", "_forced", "_piece", "_state", "_text")

    def __init__(
        self,
        fmt: ReasoningFormat,
        *,
        budget: int,
        start: ReplyStart,
        closing_ids: Sequence[int],
        piece: Callable[[int], str],
    ) -> None:
        """``closing_ids``: the ids the engine writes to end reasoning (the closing tag, with the line breaks
        a template puts around it); ``piece``: a token id's text."""
        if budget < 0:
            raise ValueError("a reasoning budget is at least 0")
        if not closing_ids:
            raise ValueError("closing_ids must not be empty")
        self._fmt, self._budget, self._closing, self._piece = fmt, budget, tuple(closing_ids), piece
        self._count = 0
        self._forced: list[int] = []
        self._text = (
            ""  # the opening so far (state "tag"), or the tail of the reasoning (to see its closing tag)
        )
        self._state: str = start if start != "answer" else "done"  # then "forcing", "done"

    @property
    def spent(self) -> int:
        """Reasoning tokens counted so far."""
        return self._count

    @property
    def active(self) -> bool:
        """Whether the budget still watches the reply (reasoning not over, nor the reply known to be answer)."""
        return self._state != "done"

    def next(self, token: int) -> int:
        """The id to use in place of ``token`` (the one just sampled): itself, or the closing tag's next id."""
        state = self._state
        if state == "done":
            return token
        if state == "forcing":
            forced = self._forced.pop(0)
            if not self._forced:
                self._state = "done"
            return forced
        if state == "tag":
            self._text = (self._text + self._piece(token)).lstrip(_WS)
            opening = self._fmt.opening
            if self._text.startswith(opening):
                self._state, self._text = "reasoning", self._text[len(opening) :]
                return token  # the opening tag is markup, not counted
            if not opening.startswith(self._text):
                self._state = "done"  # the reply began otherwise: it is all answer
            return token
        # Inside reasoning.
        if self._count >= self._budget:
            self._forced = list(self._closing)
            self._state = "forcing"
            return self.next(token)
        self._count += 1
        closing = self._fmt.closing
        self._text = (self._text + self._piece(token))[-2 * len(closing) :]
        if closing in self._text:
            self._state = "done"  # the model closed it itself
        return token
