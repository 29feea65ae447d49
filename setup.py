"""Package list for setuptools. Everything else is in pyproject.toml.

The rule set lives in the top-level `rules/` folder and installs as the `vramlens_rules` package
(`package-dir` in pyproject.toml). pyproject's `packages.find` cannot rename a folder, and an explicit
list there would drop any subpackage added later, so the list is computed here.
"""

from setuptools import find_packages, setup

setup(packages=find_packages("server") + ["vramlens_rules"])
