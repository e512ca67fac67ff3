# Stage 1: MNIST. `mnistbench fetch` tries the configured mirrors, then (unless
# default_mirrors: false) the public ones, and verifies the official MD5 digests. Files already
# in data_dir are used as they are: point data_dir at a folder that holds the four files
# (e.g. synthetic ones for tests) and this rule never runs.
#
# One job per file (`mnistbench fetch --file NAME`): Snakemake removes a job's outputs before
# it runs and after it fails, so a job that owned all four files would delete the verified
# ones whenever one was missing and the mirrors failed. A job here touches only its own file.
#
# The mirrors are deliberately not params: where the files came from must not make Snakemake
# fetch verified files again (a params change reruns a job), e.g. after `make study` passed
# an offline mirror and a later plain `snakemake` run did not.


rule fetch:
    output:
        os.path.join(DATA_DIR, "{name}"),
    log:
        "results/logs/fetch/{name}.log",
    wildcard_constraints:
        name="|".join(re.escape(name) for name in files.FILES),
    localrule: True
    params:
        dest=lambda wildcards, output: os.path.dirname(output[0]),
    run:
        shell(
            f"mnistbench fetch --dest {{params.dest:q}} --file {{wildcards.name}} "
            f"{mirror_flags()} > {{log}} 2>&1"
        )
