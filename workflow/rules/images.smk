# Stage 1b (runner docker only): the image of each device of the study, built by
# `mnistbench docker build`; the runner's helpers are in docker.smk.


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
        "../../envs/conda.yaml"
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
        mnistbench lock-file {params.lock:q} >{log} 2>&1
        (
            flock 9 || exit 1
            mnistbench docker build --dockerfile {input.dockerfile:q} --tag {params.tag:q} \\
            --context {params.context:q} {params.build_args} {params.options} \\
            --record {output.record:q}
        ) 9<{params.lock:q} >>{log} 2>&1
        """
