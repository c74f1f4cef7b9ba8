"""A custom env registered in a user's module, named in gymnasium's ``module:id`` form."""

import subprocess
import sys

import pytest

from rl_lightning.envs import EnvGroup, check_env_id

MODULE_ID = "tests.envs.custom_task:custom_task/Pole-v0"


def test_module_id_imports_the_module_in_this_process_and_in_async_workers():
    """Test that a fresh process steps the module's env from its 'module:id' name, sync and async."""
    code = (
        "import sys\n"
        "import numpy as np\n"
        "from rl_lightning.envs import EnvGroup\n"
        "assert 'tests.envs.custom_task' not in sys.modules\n"
        "for mode in ('sync', 'async'):\n"
        f"    envs = EnvGroup({MODULE_ID!r}, 2, vectorization=mode, seed=0)\n"
        "    envs.reset(seed=0)\n"
        "    for _ in range(60):\n"
        "        step = envs.step(np.array([0, 1]))\n"
        "    print(mode, envs.observation_space.shape, tuple(step.obs.shape))\n"
        "    envs.close()\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert [line.split()[0] for line in lines] == ["sync", "async"] and all("(4,) (2, 4)" in line for line in lines)


@pytest.mark.parametrize(
    "env_id, match",
    [
        ("no_such_pkg.envs:x/Task-v0", r"the module 'no_such_pkg.envs' cannot be imported.*PYTHONPATH"),
        ("tests.envs.custom_task:custom_task/Polo-v0", r"Did you mean 'custom_task/Pole-v0'.*did not register it"),
        ("mypkg/Task-v0", r"Unknown environment id 'mypkg/Task-v0'\. Register .*'module:id'"),
    ],
)
def test_a_custom_id_that_cannot_be_found_names_the_fix(env_id, match):
    """Test that an unimportable module, a typo'd id and an unregistered namespaced id each get the fix, and that
    a namespaced id is offered no far-fetched suggestion."""
    with pytest.raises(ValueError, match=match) as info:
        check_env_id(env_id)
    assert "MountainCar" not in str(info.value)


def test_an_env_group_of_the_module_id_keeps_the_name():
    """Test that EnvGroup labels its envs with the id as given (module included)."""
    envs = EnvGroup(MODULE_ID, 1)
    try:
        assert envs.env_id == MODULE_ID and envs.action_space.n == 2
    finally:
        envs.close()
