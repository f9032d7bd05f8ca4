"""The differential suite with group commit on: the engine writes through a ``GroupStore``,
and each burst of sends (``send_message``, ``chain``, ``pester``) runs in one batch, one
write transaction with a savepoint per operation, committed once at the burst's end, as the
runtime's writer commits the calls queued behind it. Every step must still agree with the
reference model: a refused send in the middle of a batch leaves no trace, the sends around
it stay, and the inbox, pair and hop guards refuse at exactly the same send."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import rule

from tests.property.test_differential import DifferentialMachine
from treemail.adapters.store.group_commit import GroupStore
from treemail.core.store import Store


class GroupCommitMachine(DifferentialMachine):
    def _open_store(self) -> Store:
        if isinstance(self.store, GroupStore) and self.directory is None:
            return self.store  # the in-memory store survives a restart as it is
        return GroupStore(super()._open_store())

    def _group(self) -> GroupStore:
        assert isinstance(self.store, GroupStore)
        return self.store

    @rule(data=st.data(), burst=st.integers(1, 3))
    def send_message(self, data: st.DataObject, burst: int) -> None:
        self._group().batch(lambda: DifferentialMachine.send_message(self, data, burst))

    @rule(data=st.data(), length=st.integers(2, 4))
    def chain(self, data: st.DataObject, length: int) -> None:
        self._group().batch(lambda: DifferentialMachine.chain(self, data, length))

    @rule(data=st.data(), count=st.integers(2, 4))
    def pester(self, data: st.DataObject, count: int) -> None:
        self._group().batch(lambda: DifferentialMachine.pester(self, data, count))


TestGroupCommit = GroupCommitMachine.TestCase
# Half the examples of the main suite: the other rules run exactly as there.
TestGroupCommit.settings = settings(TestGroupCommit.settings,
                                    max_examples=max(TestGroupCommit.settings.max_examples // 2, 1))
