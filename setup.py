"""Package discovery, which pyproject.toml cannot express alone: every package under plm_toolkit/ is found (its data
folders, such as corpora/sst2, as namespace packages, so their files ship without setuptools' warnings), and the
Hydra configs at the top-level configs/ folder install as plm_toolkit.configs with their group folders."""

from setuptools import find_namespace_packages, setup

SKIP = ["*.__pycache__", "*.__pycache__.*"]
packages = find_namespace_packages(include=["plm_toolkit", "plm_toolkit.*"], exclude=SKIP)
configs = [
    "plm_toolkit.configs",
    *(f"plm_toolkit.configs.{name}" for name in find_namespace_packages("configs", exclude=SKIP)),
]
setup(packages=packages + configs)
