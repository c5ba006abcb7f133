import pytest

from rlvr.models import make_tiny_model_dir


@pytest.fixture(scope="module", params=["qwen2", "llama"])
def model_dir(request, tmp_path_factory):
    """A saved tiny model folder of each architecture."""
    return make_tiny_model_dir(tmp_path_factory.mktemp(request.param) / "model", arch=request.param,
                               preset="test", seed=3)
