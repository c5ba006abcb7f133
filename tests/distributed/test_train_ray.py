"""`rlvr train` with distributed.backend=ray: the sort task learns with two rollout workers, and
asynchronously (max_staleness 1) with truncated importance sampling; resume works as without Ray."""

import re
import socket

import pytest
import yaml

from ray_helpers import ray_sections, tiny_config
from rlvr.config import ConfigError, load_config
from rlvr.distributed.run import train_distributed
from rlvr.jsonl import read_jsonl
from rlvr.train.checkpoint import latest_checkpoint
from rlvr.train.loop import train

pytestmark = pytest.mark.slow


def _learn_config(path, model, **distributed):
    return tiny_config(
        path, model, task={"options": {"length": 4, "reward": "sparse"}, "train_size": 5000, "eval_size": 64},
        algorithm={"mu": 2, "is_cap": 2.0}, rollout={"max_new_tokens": 10, "max_staleness": distributed.pop("k", 0)},
        train={"steps": 30, "batch_size": 256, "group_size": 8, "mini_batch_size": 128},
        optim={"lr": 3e-4, "warmup_steps": 2}, eval={"every": 0, "samples": 8}, checkpoint={"every": 0},
        log={"progress": False, "plots": False, "report_to": []}, distributed=ray_sections(**distributed))


@pytest.mark.parametrize("placement", [{"rollout_workers": 2},
                                       {"rollout_workers": 1, "k": 1, "weight_sync": "collective"}],
                         ids=["two_workers", "async_k1_collective"])
def test_sort_learns_on_ray(ray_cluster, tmp_path, warm_model, placement):
    result = train_distributed(load_config(None, [], base=_learn_config(tmp_path / "run", warm_model, **placement)))
    before, after = result.first_eval, result.final_eval
    assert after["eval/sampled_accuracy"] >= before["eval/sampled_accuracy"] + 0.05, (before, after)
    rows = read_jsonl(result.run_dir / "metrics.jsonl")[1:]
    assert len(rows) == 30
    assert sum(r["reward"] for r in rows[-10:]) > sum(r["reward"] for r in rows[:10])
    assert {r["staleness"] for r in rows} == ({0.0, 1.0} if placement.get("k") else {0.0})  # step 1 is fresh
    assert all(0 < r["is/weight_mean"] <= 2.0 and 0 <= r["is/truncated_share"] < 1 for r in rows)


@pytest.mark.parametrize("learners, rollout", [
    ({}, {}), ({"learners": 2, "shard": True}, {}), ({"learners": 2, "shard": True, "weight_sync": "collective"}, {}),
    ({"learners": 2, "colocate": True, "rollout_cpus": None}, {"data_parallel": 2})],
    ids=["one_learner", "two_sharded", "two_sharded_collective", "two_colocated"])
def test_ray_run_stopped_and_resumed_equals_local(ray_cluster, tmp_path, warm_model, learners, rollout):
    """A synchronous Ray run (one worker; one learner, or two sharding the policy with FSDP2) stopped
    after its step-2 checkpoint and resumed with Ray ends where the uninterrupted one-process run
    ends: same losses, same held-out metrics. Sharded, the checkpoint's policy and optimizer state
    are gathered whole, and every rank takes its shard back on resume; with `weight_sync: collective`
    both ranks gather the weights and rank 0 broadcasts them to the rollout worker. Colocated
    (`distributed.colocate`), the two ranks sample the step's two parts, their engines loaded from the resumed
    ranks' own policies; the one-process run samples the same two parts in turn."""
    sections = {"train": {"steps": 4, "batch_size": 16, "group_size": 4}, "rollout": rollout,
                "log": {"progress": False, "plots": False}}
    local = train(load_config(None, [], base=tiny_config(tmp_path / "local", warm_model, **sections)))
    stopped = tiny_config(tmp_path / "ray", warm_model, **{**sections, "train": {**sections["train"], "steps": 2}},
                          distributed=ray_sections(**learners))
    train_distributed(load_config(None, [], base=stopped))
    assert latest_checkpoint(tmp_path / "ray") is not None
    resumed = train_distributed(load_config(None, [], base={**stopped, "train": sections["train"]}), resume=True)
    assert resumed.final_eval == local.final_eval
    losses = [[r["loss"] for r in read_jsonl(r.run_dir / "metrics.jsonl")[1:]] for r in (local, resumed)]
    assert losses[1] == pytest.approx(losses[0], abs=1e-6)


@pytest.mark.parametrize("sections, needle", [
    ({"learners": 2, "learner_cpus": 1.0, "rollout_cpus": 1.0},
     "the roles reserve 3 CPUs (2 learner(s) x learner_cpus 1 + 1 rollout worker(s) x rollout_cpus 1) but the "
     "Ray cluster has 2"),
    ({"rollout_workers": 2, "rollout_gpus": 0.5}, "the roles reserve 1 GPUs"),
])
def test_roles_that_do_not_fit_the_cluster_are_refused_before_anything_is_written(ray_cluster, tmp_path, warm_model,
                                                                                  capsys, sections, needle):
    """Ray would keep the actors that do not fit pending and the run would wait for ever: one line, exit 2,
    no run folder. (The CLI joins the test's 2-CPU cluster, which `address: local` says this run owns.)"""
    from rlvr.cli import main
    from rlvr.distributed.cluster import check_resources

    base = tiny_config(tmp_path / "run", warm_model, distributed=ray_sections(**sections))
    with pytest.raises(ConfigError, match=re.escape(needle)):
        check_resources(load_config(None, [], base=base))
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(base))
    assert main(["train", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err and not (tmp_path / "run").exists()
    check_resources(load_config(None, [], base=tiny_config(tmp_path / "run", warm_model,
                                                           distributed=ray_sections(learners=2))))  # 0.5 each: fits


def test_no_cluster_at_the_address_is_one_line_naming_the_key(tmp_path, warm_model, monkeypatch):
    """`ray.init` raises ConnectionError when nothing answers at `distributed.address` (Ray's own message, as
    `address=auto` with no `ray start` gives it); the run refuses with the key, exit 2, not an internal error."""
    import rlvr.distributed.cluster as roles

    def init(address, **_):
        raise ConnectionError("Could not find any running Ray instance. Please specify the one to connect to.")

    monkeypatch.setattr(roles.ray, "is_initialized", lambda: False)
    monkeypatch.setattr(roles.ray, "init", init)
    with socket.socket() as head:  # something answers at this port, so the address passes the reachability check
        head.bind(("127.0.0.1", 0))
        head.listen()
        port = head.getsockname()[1]
        for address, hint in (("auto", "ray start --head"), (f"127.0.0.1:{port}", "reachable")):
            cfg = load_config(None, [], base=tiny_config(tmp_path / "run", warm_model,
                                                         distributed=ray_sections(address=address)))
            with pytest.raises(ConfigError, match=rf"^distributed.address={re.escape(address)}: Could not find any "
                                                  rf"running Ray instance\..*{hint}") as err:
                roles.start_ray(cfg)
            assert "\n" not in str(err.value)


def test_an_address_where_nothing_answers_is_refused_before_ray_init(tmp_path, warm_model, monkeypatch):
    """`ray.init("HOST:PORT")` with no head there retries for minutes printing its client's warnings (measured:
    over 5 minutes); the address is tried first, and the run refuses in one line within seconds."""
    import ray._private.services as services

    import rlvr.distributed.cluster as roles

    def init(address, **_):
        raise AssertionError("ray.init must not be reached")

    monkeypatch.setattr(roles.ray, "is_initialized", lambda: False)
    monkeypatch.setattr(roles.ray, "init", init)
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]  # bound, not listening: a connection is refused
        for address in (f"127.0.0.1:{port}", f"ray://127.0.0.1:{port}"):
            cfg = load_config(None, [], base=tiny_config(tmp_path / "run", warm_model,
                                                         distributed=ray_sections(address=address)))
            with pytest.raises(ConfigError, match=rf"^distributed.address={re.escape(address)}: nothing answers at "
                                                  rf"127.0.0.1:{port} \(.*\); is the Ray head running there "
                                                  rf"\(`ray start --head --port={port}`\)") as err:
                roles.start_ray(cfg)
            assert "\n" not in str(err.value)
        monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{port}")
        cfg = load_config(None, [], base=tiny_config(tmp_path / "run", warm_model,
                                                     distributed=ray_sections(address="auto")))
        with pytest.raises(ConfigError, match=rf"^distributed.address=auto \(found: 127.0.0.1:{port}\): "
                                              "nothing answers"):
            roles.start_ray(cfg)
        monkeypatch.delenv("RAY_ADDRESS")  # the address a killed `ray start --head` left in Ray's temp folder
        monkeypatch.setattr(services, "find_gcs_addresses", lambda: frozenset())
        monkeypatch.setattr(services, "find_bootstrap_address", lambda temp_dir: f"127.0.0.1:{port}")
        with pytest.raises(ConfigError, match=rf"^distributed.address=auto \(found: 127.0.0.1:{port}\): "
                                              "nothing answers"):
            roles.start_ray(cfg)
