"""Next-token losses on target tokens only, summed (callers divide by the token count): the
cross-entropy against the labels, and the divergence of one forward's predictions from
another's (a draft distilled from the full model)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["IGNORE_INDEX", "distill_loss_sums", "next_token_targets", "token_loss_sums"]

#: Label of positions that carry no loss (prompt and padding), as in transformers.
IGNORE_INDEX = -100


def token_loss_sums(
    logits: torch.Tensor, labels: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(summed cross-entropy, number of scored tokens) for logits ``(B, T, V)`` and labels
    ``(B, T)``: position ``t`` predicts token ``t + 1``, so the last prompt position predicts
    target token 0."""
    positions, targets = next_token_targets(labels)
    loss = F.cross_entropy(logits[positions].float(), targets, reduction="sum")
    return loss, torch.tensor(targets.numel(), device=targets.device)


def distill_loss_sums(
    logits: torch.Tensor, teacher_logits: torch.Tensor, labels: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(summed KL(teacher || student), number of scored tokens) for student ``logits`` and
    ``teacher_logits`` ``(B, T, V)`` at the positions :func:`token_loss_sums` scores. The
    teacher is a target, not trained: no gradient reaches it. Zero when the two agree; its
    gradient is that of the cross-entropy against the teacher's distribution."""
    positions, targets = next_token_targets(labels)
    student = F.log_softmax(logits[positions].float(), dim=-1)
    teacher = F.log_softmax(teacher_logits[positions].detach().float(), dim=-1)
    loss = F.kl_div(student, teacher, reduction="sum", log_target=True)
    return loss, torch.tensor(targets.numel(), device=targets.device)


def next_token_targets(labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The positions that carry a loss and the tokens they predict, for labels ``(B, T)``:
    a boolean mask ``(B, T)`` (position ``t`` is scored when label ``t + 1`` is) and the ``N``
    targets of the masked positions in row-major order. Reading logits out at these positions
    only (``SkipDecoder.forward_exits``) gives :func:`token_loss_sums` without computing the
    head where no loss is taken."""
    following = torch.full_like(labels, IGNORE_INDEX)
    following[:, :-1] = labels[:, 1:]
    positions = following != IGNORE_INDEX
    return positions, following[positions]
