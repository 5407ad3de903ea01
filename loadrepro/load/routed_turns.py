"""What a later turn may expect from the prefix cache when the load is spread over replicas request by request: a
replica caches what it was sent, so a turn sent to another replica than its conversation's turn before finds
nothing of that conversation there, whatever the engine does (rule prefix_reuse_missing judges the engine)."""

from __future__ import annotations

from loadrepro.records import RequestRecord


class RoutedTurns:
    def __init__(self, spread: bool) -> None:
        """`spread`: a conversation's turns may go to different replicas (round-robin routing over replicas);
        otherwise every turn of a conversation goes to one and records pass unchanged."""
        self._spread = spread
        self._latest: dict[int, tuple[int, int]] = {}  # each conversation's latest turn ended, and its replica

    def expected(self, record: RequestRecord) -> RequestRecord:
        """`record` with nothing expected from the prefix cache (shared_prefix_tokens 0) when its conversation's
        turn before went to another replica, or has not ended yet (a trace's turns may overlap): only a turn
        whose turn before went to the same replica can be held to its shared prefix."""
        if not self._spread:
            return record
        before = self._latest.get(record.conversation)
        if before is None or record.turn > before[0] or record.turn == 1:  # 1: a soak's next pass of it
            self._latest[record.conversation] = (record.turn, record.replica)
        if record.turn <= 1 or not record.shared_prefix_tokens or before == (record.turn - 1, record.replica):
            return record
        return record.expecting_no_cache()
