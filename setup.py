"""Packages found, not listed: setuptools' find_packages over harness/ and the two folders the wheel installs
under other names (models/ -> harness_zoo, suites/ -> harness_suites: a wheel must not install top-level
`models` or `suites`). Everything else is in pyproject.toml."""

from setuptools import find_packages, setup

PACKAGE_DIRS = {"harness": "harness", "harness_zoo": "models", "harness_suites": "suites"}


def packages() -> list[str]:
    found = []
    for name, folder in PACKAGE_DIRS.items():
        found += [name] + [f"{name}.{sub}" for sub in find_packages(folder)]
    return found


if __name__ == "__main__":
    setup(packages=packages(), package_dir=PACKAGE_DIRS)
