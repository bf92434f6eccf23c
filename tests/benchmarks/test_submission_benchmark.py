"""benchmarks.submission runs the real command end to end against moto: a small run here keeps it from
rotting as the command and the stack's parameters change (its figures come from the benchmark itself)."""

from __future__ import annotations

from benchmarks import submission


def test_a_small_submission_is_written_whole_in_transactions_and_batches(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    result = submission.run(250, stock_moto=False)
    assert result["exit_code"] == 0 and result["jobs_in_ledger"] == 250
    # 100 conditional puts a transaction, 10 messages a batch.
    assert result["calls"]["TransactWriteItems"] == 3 and result["calls"]["SendMessageBatch"] == 25
