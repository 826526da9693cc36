"""The metrics writers are Acme loggers: Acme's filters and dispatchers wrap them."""

import os

from acme.utils import loggers

from apex.metrics import MetricsWriter, RemoteMetrics, read_jsonl


def test_metrics_writer_under_acme_filters_and_dispatcher(tmp_path):
    run_dir = str(tmp_path)
    writer = MetricsWriter(run_dir, "learner", "learner/steps", tensorboard=False)
    assert isinstance(writer, loggers.Logger)
    logger = loggers.Dispatcher([loggers.NoneFilter(writer), loggers.InMemoryLogger()])
    logger.write({"learner/steps": 3, "learner/loss": 0.5, "learner/unset": None})
    logger.close()
    rows = read_jsonl(os.path.join(run_dir, "metrics", "learner.jsonl"))
    assert len(rows) == 1
    assert rows[0]["learner/steps"] == 3 and rows[0]["learner/loss"] == 0.5
    assert "learner/unset" not in rows[0]  # Acme's NoneFilter dropped it


def test_remote_metrics_is_an_acme_logger_sending_rows_to_the_coordinator():
    sent = []

    class Coordinator:  # the one RPC RemoteMetrics calls
        def write_metrics(self, component, step_key, row):
            sent.append((component, step_key, row))

    remote = RemoteMetrics(Coordinator(), "actor_0", "actor/env_steps")
    assert isinstance(remote, loggers.Logger)
    loggers.KeyFilter(remote, keep=("actor/env_steps",)).write(
        {"actor/env_steps": 10, "actor/other": 1}
    )
    assert len(sent) == 1 and sent[0][:2] == ("actor_0", "actor/env_steps")
    assert sent[0][2]["actor/env_steps"] == 10 and "actor/other" not in sent[0][2]
