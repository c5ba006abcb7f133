"""CPU shares left empty are taken from the Ray cluster: on a 2-core machine, 1 learner and 2 rollout workers
with the defaults were refused (3 CPUs reserved, 2 there) although fractions worked."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ray_helpers import tiny_config
from rlvr.config import ConfigError, load_config
from rlvr.distributed.cluster import check_resources, cpu_shares
from rlvr.distributed.run import train_distributed
from rlvr.jsonl import read_jsonl


def test_shares_by_hand():
    assert cpu_shares(1, None, 2, None, 2.0) == (pytest.approx(2 / 3), pytest.approx(2 / 3))
    assert cpu_shares(1, None, 1, None, 16.0) == (1.0, 1.0)  # at most 1 each: an actor runs 1 torch thread
    assert cpu_shares(1, 1.0, 2, None, 2.0) == (1.0, 0.5)  # what the set share leaves
    assert cpu_shares(2, None, 1, 0.5, 2.0) == (0.75, 0.5)
    assert cpu_shares(1, 3.0, 2, 2.0, 2.0) == (3.0, 2.0)  # both set: as set (check_resources says they misfit)
    assert cpu_shares(2, 1.0, 0, None, 2.0) == (1.0, 0.0)  # colocated: no rollout actors, their share left empty
    with pytest.raises(ConfigError, match="reserve all 2 CPUs of the Ray cluster, none is left for the actors of "
                                          "rollout_cpus; lower the set shares or set rollout_cpus too"):
        cpu_shares(2, 1.0, 1, None, 2.0)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 8), st.one_of(st.none(), st.floats(0.1, 4)), st.integers(1, 8),
       st.one_of(st.none(), st.floats(0.1, 4)), st.floats(0.5, 64))
def test_shares_fit_the_cluster_and_keep_what_is_set(learners, learner_cpus, workers, rollout_cpus, cluster):
    try:
        learner, rollout = cpu_shares(learners, learner_cpus, workers, rollout_cpus, cluster)
    except ConfigError:
        assert learners * (learner_cpus or 0) + workers * (rollout_cpus or 0) >= cluster - 1e-9
        return
    assert (learner_cpus is None or learner == learner_cpus) and (rollout_cpus is None or rollout == rollout_cpus)
    derived = [share for share, set_ in ((learner, learner_cpus), (rollout, rollout_cpus)) if set_ is None]
    assert all(0 < share <= 1 for share in derived) and len(set(derived)) <= 1
    if derived:  # the empty shares take what the set ones leave: all of it, unless 1 each is less
        reserved = learners * learner + workers * rollout
        assert reserved <= cluster + 1e-6 and (derived[0] == 1 or reserved == pytest.approx(cluster))


def test_two_rollout_workers_on_two_cores_run_by_default(ray_cluster, tmp_path, warm_model):
    base = tiny_config(tmp_path / "run", warm_model, train={"steps": 2, "batch_size": 16, "group_size": 4},
                       log={"progress": False, "plots": False, "report_to": []},
                       distributed={"backend": "ray", "rollout_workers": 2})
    cfg = load_config(None, [], base=base)
    assert cfg.distributed.rollout_cpus is None and ray_cluster.cluster_resources()["CPU"] == 2
    check_resources(cfg)  # refused before: 3 CPUs reserved of 2
    result = train_distributed(cfg)
    assert [r["step"] for r in read_jsonl(result.run_dir / "metrics.jsonl")] == [0, 1, 2]


def test_an_older_runs_config_with_the_former_defaults_still_loads(tmp_path):
    """config.yaml holds every default: an older run's says rollout_cpus: 1.0, learner_cpus: 1.0 (the defaults
    before empty shares were taken from the cluster); its resume in one process must not be refused for them."""
    cfg = load_config(None, [], base={"distributed": {"rollout_cpus": 1.0, "learner_cpus": 1.0}})
    assert cfg.distributed.backend == "none" and cfg.distributed.rollout_cpus == 1.0
    with pytest.raises(ConfigError, match="distributed.rollout_cpus=0.5 needs distributed.backend=ray"):
        load_config(None, ["distributed.rollout_cpus=0.5"])
