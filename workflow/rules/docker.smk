# The docker runner (config runner: docker): one image per device of the study, each timed
# cell in its device's image. Rule docker_image (images.smk) builds the images into
# results/images/{device}.json; the runner (mnistbench.launch.plan.docker_launcher) puts
# `mnistbench docker run --record results/images/{device}.json ... --` in front of the bench
# rule's `train ...` flags (its `mnistbench run-cell --launcher`), under the same lock.
# mnistbench.launch.container does the HOW.
#
# The engine is checked when the jobs are about to start (START_HOOKS, common.smk): a missing
# `docker` or a stopped daemon stops the run before any job starts, with the fix. Dry runs and
# --lint need no engine, so a study can be planned on a machine without Docker; a missing
# Dockerfile is a config error as soon as the DAG is built.

# The images' build context: the project's folder (PROJECT, the Snakefile's).


def image_dockerfile(device):
    """The Dockerfile of a device's image, absolute (a missing one stops the workflow)."""
    return planned(plan.image_dockerfile, PROJECT, config, device)


def image_sources():
    """What an image is built from besides its Dockerfile; a change to any rebuilds it."""
    return plan.image_sources(PROJECT)


def check_docker_engine():
    """Start hook: stop the run before any job starts when no Docker engine answers."""
    version = planned(plan.docker_engine_version)
    print(f"runner docker: Docker engine {version} answers", file=sys.stderr)


def cell_image(wildcards):
    """The bench job's image record when runner is docker, else nothing. ancient(): a rebuilt
    image (a code or dependency change) does not rerun finished cells, as a code change does
    not with runner: local; delete a cell's folder to rerun it in the new image."""
    if config["runner"] != "docker":
        return []
    return ancient(plan.image_record(RESULTS, cell(wildcards).device))


if config["runner"] == "docker":
    # Before the fork server and the estimate, which writes under results/: a missing engine
    # stops the run having written nothing.
    START_HOOKS.insert(START_HOOKS.index(check_software) + 1, check_docker_engine)
