# The docker runner (config runner: docker): one image per device of the study, each timed
# cell in its device's image. Rule docker_image (images.smk) builds the images into
# results/images/{device}.json; docker_launcher puts `mnistbench docker run --record
# results/images/{device}.json ... --` in front of the bench rule's `train ...` flags, inside
# the same flock. mnistbench.launch.container does the HOW.
#
# The engine is checked when the jobs are about to start (START_HOOKS, common.smk): a missing
# `docker` or a stopped daemon stops the run before any job starts, with the fix. Dry runs and
# --lint need no engine, so a study can be planned on a machine without Docker; a missing
# Dockerfile is a config error as soon as the DAG is built.

# The images' build context: the Snakefile's folder.
PROJECT = Path(workflow.basedir).resolve()
IMAGE_RECORDS = f"{RESULTS}/images"


def image_record(device):
    """The record (image ID, tag, build inputs) of the image a device's cells run in."""
    return f"{IMAGE_RECORDS}/{device}.json"


def check_docker_devices(devices):
    """Stop at once when a device of the study has no image of the docker runner (xpu, mps):
    the schema's docker.images names one per device it runs."""
    missing = [d for d in devices if d not in config["docker"]["images"]]
    if missing:
        raise WorkflowError(
            f"config key runner is docker, but the docker runner has images for "
            f"{', '.join(config['docker']['images'])} cells only, not for "
            f"{', '.join(missing)}. Leave {', '.join(missing)} out of config devices, or "
            "use runner: local (an Intel GPU's study can run inside docker/xpu.Dockerfile's "
            "image: docs/docker.md; Apple's MPS has no container)."
        )


def image_dockerfile(device):
    """The Dockerfile of a device's image (config docker.images.DEVICE.dockerfile), absolute;
    a missing one stops the workflow when the DAG is built (dry runs too), naming the key.
    """
    path = PROJECT / config["docker"]["images"][device]["dockerfile"]
    if not path.is_file():
        raise WorkflowError(
            f"config key docker.images.{device}.dockerfile: {path} does not exist. "
            "Give a Dockerfile relative to the project folder (the default is "
            f"docker/{device}.Dockerfile), or set runner: local."
        )
    return str(path)


def image_sources():
    """What an image is built from besides its Dockerfile; a change to any rebuilds it.

    The pinned dependencies (envs/pip/*.txt, pyproject.toml), the entrypoint, the build
    context's filter, and the package's sources: the image holds the package, so without them
    a code change would leave new cells running the old code (the local runner runs the new
    one). A rebuild after a code change takes seconds: the dependency layers come from
    Docker's cache. Not inputs: workflow/ and config/ (copied into the image, but a cell runs
    only `mnistbench train` in it, so editing the study never rebuilds an image) and README.md.
    """
    fixed = [PROJECT / "pyproject.toml", PROJECT / ".dockerignore"]
    fixed += [PROJECT / "docker" / "entrypoint.sh"]
    fixed += sorted((PROJECT / "envs" / "pip").glob("*.txt"))
    package = sorted(
        path
        for path in (PROJECT / "src").rglob("*")
        if path.is_file()
        and path.suffix != ".pyc"
        and not any(p == "__pycache__" or p.endswith(".egg-info") for p in path.parts)
    )
    return [str(path) for path in fixed + package]


def check_docker_engine():
    """Stop the run before any job starts when no Docker engine answers (runner: docker)."""
    from mnistbench.launch import container

    try:
        version = container.check_engine()
    except container.ContainerError as exc:
        raise WorkflowError(
            f"config key runner is docker, but {exc} Or set runner: local (the default)."
        ) from None
    print(f"runner docker: Docker engine {version} answers", file=sys.stderr)


def docker_launcher(wildcards):
    """`mnistbench docker run ... --` in the image of the cell's device; the bench rule's
    `train` flags follow (its --data is mounted read-only, its --out lies in results/).
    """
    settings = config["docker"]
    options = [f"--docker-option={option}" for option in settings["run_options"]]
    record = image_record(cell(wildcards).device)
    return shlex.join(
        ["mnistbench", "docker", "run", "--record", record, "--results", RESULTS]
        + ["--shm-size", settings["shm_size"], *options, "--"]
    )


def cell_image(wildcards):
    """The bench job's image record when runner is docker, else nothing. ancient(): a rebuilt
    image (a code or dependency change) does not rerun finished cells, as a code change does
    not with runner: local; delete a cell's folder to rerun it in the new image."""
    if config["runner"] != "docker":
        return []
    return ancient(image_record(cell(wildcards).device))


if config["runner"] == "docker":
    START_HOOKS.append(check_docker_engine)
