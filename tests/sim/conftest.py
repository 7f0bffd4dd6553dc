import pytest

from ivln_ce.scenes.layout import generate_house
from ivln_ce.scenes.mesh import save_scene

SCENE_SEED = 3


@pytest.fixture(scope="session")
def scene_file(tmp_path_factory):
    """A generated house saved as .glb + sidecar (the embedded backend's real input)."""
    return save_scene(generate_house(SCENE_SEED), tmp_path_factory.mktemp("scenes"))
