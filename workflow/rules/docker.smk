# The docker runner (config runner: docker): one image per device of the study, each timed
# cell in its device's image. This rule builds the images; docker_launcher (common.smk) puts
# `mnistbench docker run --record results/images/{device}.json ... --` in front of the bench
# rule's `train ...` flags, inside the same flock. mnistbench.container does the HOW.
#
# The engine is checked when the jobs are about to start (START_HOOKS, common.smk): a missing
# `docker` or a stopped daemon stops the run before any job starts, with the fix. Dry runs and
# --lint need no engine, so a study can be planned on a machine without Docker; a missing
# Dockerfile is a config error at once.
if config["runner"] == "docker":
    check_images_config()
    START_HOOKS.append(check_docker_engine)


# One image per device: `mnistbench docker build` writes the record (image ID, tag, Dockerfile
# digest, build arguments, engine version) atomically, and only after a successful build. The
# build holds the machine-wide timing lock, so a cold build (minutes of pip and layer commits)
# never runs beside a timed cell of another study on this machine.
rule docker_image:
    input:
        dockerfile=lambda wildcards: image_dockerfile(wildcards.device),
        sources=image_sources(),
    output:
        record="results/images/{device}.json",
    log:
        "results/logs/images/{device}.log",
    wildcard_constraints:
        device="|".join(DEVICES),
    conda:
        "../envs/mnistbench.yaml"
    params:
        tag=lambda wildcards: config["docker"]["images"][wildcards.device]["tag"],
        build_args=shlex.join(
            f"--build-arg={key}={value}"
            for key, value in config["docker"]["build_args"].items()
        ),
        options=shlex.join(
            f"--docker-option={option}" for option in config["docker"]["build_options"]
        ),
        context=lambda wildcards: str(PROJECT),
        lock=TIMING_LOCK,
    shell:
        """
        (
            flock 9 || exit 1
            mnistbench docker build --dockerfile {input.dockerfile:q} --tag {params.tag:q} \\
            --context {params.context:q} {params.build_args} {params.options} \\
            --record {output.record:q}
        ) 9<{params.lock:q} >{log} 2>&1
        """
