"""Every name of the core API is importable from rlvr.core, and registries reject unknown names."""

import pytest

import rlvr.core

PROMISED = """masked_sum masked_mean masked_normalize masked_whiten aggregate_loss keep_tokens token_logprobs
entropy_from_logits raw_advantages centered_advantages grpo_advantages max_only_advantages
rloo_advantages whitened_advantages gae pg_loss clipped_surrogate_loss sequence_clipped_surrogate_loss
kimi_loss clipped_value_loss kl_k1 kl_k2 kl_k3 kl_shaped_rewards ratio_weighted_kl dpo_loss ipo_loss simpo_loss
ln_dpo_loss ADVANTAGES POLICY_LOSSES KL_ESTIMATORS PREFERENCE_LOSSES""".split()


def test_promised_names_are_exported():
    missing = [name for name in PROMISED if name not in rlvr.core.__all__ or not hasattr(rlvr.core, name)]
    assert missing == []


@pytest.mark.parametrize("getter, registry", [
    ("get_advantage_fn", "ADVANTAGES"), ("get_policy_loss", "POLICY_LOSSES"),
    ("get_kl_estimator", "KL_ESTIMATORS"), ("get_preference_loss", "PREFERENCE_LOSSES"),
])
def test_unknown_name_lists_the_valid_ones(getter, registry):
    with pytest.raises(ValueError) as info:
        getattr(rlvr.core, getter)("no_such_thing")
    assert all(name in str(info.value) for name in getattr(rlvr.core, registry))
