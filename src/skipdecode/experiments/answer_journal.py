"""A long benchmark's answers, kept as they are made, so that a killed run resumes.

A run over hundreds of questions takes hours on a CPU. :class:`AnswerJournal` appends each
finished question's answers (every method's) to ``<folder>/answers.jsonl`` as one line, flushed
to disk, beside ``settings.json``: what defines the answers (model, methods, tokens). A run
started again with the same settings skips the questions the journal holds; one with other
settings is refused, naming them, so answers made under two settings never mix. A line cut off
by a kill is dropped. The run writes its results whole at the end, then removes the journal
(:meth:`AnswerJournal.remove`): nothing half-written is ever a result.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from ..io import write_json_atomic, write_text_atomic

__all__ = ["AnswerJournal"]


class AnswerJournal:
    """The answers of the questions finished so far, per question id and method."""

    def __init__(self, folder: Path, settings: dict[str, Any]):
        self.folder = Path(folder)
        self.settings = json.loads(json.dumps(settings, default=str))
        self.done: dict[str, dict[str, Any]] = {}
        settings_file = self.folder / "settings.json"
        answers_file = self.folder / "answers.jsonl"
        if settings_file.is_file():
            before = json.loads(settings_file.read_text())
            changed = sorted(
                k for k in set(before) | set(self.settings) if before.get(k) != self.settings.get(k)
            )
            if changed:
                what = "; ".join(
                    f"{k}: {before.get(k)!r} there, {self.settings.get(k)!r} now" for k in changed
                )
                raise ValueError(
                    f"{self.folder} holds answers of a run with other settings ({what}); "
                    f"rerun with the same settings to resume it, or remove the folder to start over"
                )
            kept = []
            for line in answers_file.read_text().splitlines() if answers_file.is_file() else []:
                try:
                    entry = json.loads(line)
                except json.JSONDecodeError:  # the line a kill cut off: that question is redone
                    continue
                self.done[str(entry["question_id"])] = entry["answers"]
                kept.append(line + "\n")
            write_text_atomic(answers_file, "".join(kept))
        else:
            self.folder.mkdir(parents=True, exist_ok=True)
            write_json_atomic(settings_file, self.settings)
            write_text_atomic(answers_file, "")

    def answers(self, question_id: Any) -> dict[str, Any] | None:
        """Every method's answer to the question, if the journal holds it."""
        return self.done.get(str(question_id))

    def add(self, question_id: Any, answers: dict[str, Any]) -> None:
        """Keep one finished question's answers (every method's), on disk before returning."""
        line = json.dumps({"question_id": question_id, "answers": answers})
        with open(self.folder / "answers.jsonl", "a") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.done[str(question_id)] = answers

    def remove(self) -> None:
        """Drop the journal (its run's results are written)."""
        shutil.rmtree(self.folder, ignore_errors=True)
