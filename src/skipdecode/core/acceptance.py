"""Which drafted tokens a verify pass accepts, per row: greedy agreement and the speculative
sampling rule (the output follows the verifier's distribution exactly)."""

from __future__ import annotations

import torch

__all__ = ["accept_greedy", "accept_sampled"]


def accept_greedy(
    drafts: torch.Tensor, proposed: torch.Tensor, full_logits: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy acceptance. ``drafts`` ``(n, m)`` proposals, ``proposed`` ``(n,)`` how many of
    them each row made, ``full_logits`` ``(n, m + 1, V)`` of the verify pass. Returns
    ``(accepted (n,), next token (n,))``: the longest prefix equal to the full model's argmax,
    then the full model's token after it."""
    target = full_logits.argmax(-1)  # (n, m + 1)
    m = drafts.shape[1]
    agree = (drafts == target[:, :m]) & (torch.arange(m, device=drafts.device) < proposed[:, None])
    accepted = agree.long().cumprod(-1).sum(-1)
    return accepted, target.gather(1, accepted[:, None]).squeeze(1)


def accept_sampled(
    drafts: torch.Tensor,
    proposed: torch.Tensor,
    p: torch.Tensor,
    q: torch.Tensor,
    generator: torch.Generator | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The speculative sampling rule. ``p`` ``(n, m + 1, V)``: the full model's distributions
    at the verify positions; ``q`` ``(n, m, V)``: the draft distributions the proposals were
    drawn from. Proposal ``i`` is accepted with probability ``min(1, p_i(d) / q_i(d))``; at the
    first rejection the token is drawn from ``norm(max(0, p_i - q_i))``; after ``proposed``
    acceptances it is drawn from ``p`` at that position. Every emitted token then follows ``p``
    exactly (Leviathan et al. 2023; Chen et al. 2023)."""
    n, m = drafts.shape
    rows = torch.arange(n, device=drafts.device)
    if m:
        p_d = p[:, :m].gather(-1, drafts[..., None]).squeeze(-1)
        q_d = q.gather(-1, drafts[..., None]).squeeze(-1)
        u = torch.rand(n, m, generator=generator, device=drafts.device)
        ok = (u * q_d < p_d) & (torch.arange(m, device=drafts.device) < proposed[:, None])
        accepted = ok.long().cumprod(-1).sum(-1)
    else:
        accepted = torch.zeros(n, dtype=torch.long, device=drafts.device)
    target = p[rows, accepted]  # (n, V)
    rejected = accepted < proposed
    if bool(rejected.any()):
        q_at = q[rows, accepted.clamp(max=max(m - 1, 0))]
        residual = (target - q_at).clamp(min=0)
        mass = residual.sum(-1, keepdim=True)
        residual = torch.where(mass > 0, residual / mass.clamp(min=1e-30), target)
        target = torch.where(rejected[:, None], residual, target)
    nxt = torch.multinomial(target, 1, generator=generator).squeeze(-1)
    return accepted, nxt
