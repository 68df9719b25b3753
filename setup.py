"""Which files the distribution holds (the metadata lives in pyproject.toml).

pyproject.toml cannot say this: data/ and results/ install as the packages ``workbench_data`` and
``workbench_results`` (a top-level ``data`` package would clash with anything), beside ``core``, ``workbench``,
``attribution``, ``circuits`` and the app (``app``, with its pages and static files), so a wheel carries
everything a checkout has. core/paths.py finds them in both layouts.
"""

from setuptools import find_namespace_packages, setup

CODE = find_namespace_packages(include=["core", "core.*", "workbench", "workbench.*", "attribution", "attribution.*",
                                        "circuits",
                                        "circuits.*", "app", "app.*"], exclude=["*.__pycache__"])
# Gemma-derived weights are never shipped (Gemma Terms of Use), even when a local build has trained them.
NOT_SHIPPED = ["lenses/gemma3-270m/*", "lenses/gemma3-270m/**/*", "**/__pycache__/*", "**/*.pyc"]

# Every folder under data/ and results/ is listed as a package too (setuptools warns about any it sees unlisted);
# their files all come from the two top entries' recursive package_data.
SHIPPED = {"workbench_data": "data", "workbench_results": "results"}
DATA = [f"{name}.{sub}" if sub else name for name, where in SHIPPED.items()
        for sub in ["", *find_namespace_packages(where=where, exclude=["*.__pycache__", "__pycache__"])]]

setup(
    packages=[*CODE, *DATA],
    package_dir=SHIPPED,
    package_data={
        "workbench_data": ["**/*"],
        "workbench_results": ["**/*.md", "**/*.json", "**/*.jsonl", "**/*.csv"],
        "app": ["static/*"],
    },
    exclude_package_data={"workbench_data": NOT_SHIPPED},
)
