"""Every ``MNISTBENCH_*`` environment variable the package reads or sets, named once.

The core (data, model, train, timing) and the launchers (forkserver, container) both import
from here, so neither imports the other for a name.
"""

from __future__ import annotations

#: An explicit environment name for the cells' results (mnistbench.core.study.environment_name).
ENV_NAME_VAR = "MNISTBENCH_ENV"
#: The image a process runs in, set by our Dockerfiles (recorded as env.container).
CONTAINER_VAR = "MNISTBENCH_CONTAINER"
#: The image ID of a cell's container, set by the docker runner for each cell it starts.
IMAGE_ID_VAR = "MNISTBENCH_CONTAINER_IMAGE_ID"
#: The git revision baked into an image, used outside a git checkout.
GIT_REVISION_VAR = "MNISTBENCH_GIT_REVISION"
#: Why the process was started without a GPU (the docker runner, when Docker could not give
#: the container one); appended to the reason of a cuda cell that finds no GPU.
GPU_NOTE_VAR = "MNISTBENCH_GPU_NOTE"
#: Mirrors tried by `mnistbench fetch` after --mirror (spaces or commas between them).
MIRROR_VAR = "MNISTBENCH_MIRROR"
#: The fork server's socket, set by the workflow for every job of an execution.
FORKSERVER_SOCKET_VAR = "MNISTBENCH_FORKSERVER"
#: How a cell's process was started (exec | fork-server), recorded as env.launch.
LAUNCH_VAR = "MNISTBENCH_LAUNCH"
#: When the cell's client process started (Unix s), so start-up counts from the client.
PROCESS_START_VAR = "MNISTBENCH_PROCESS_START"
#: The digest of the workflow lines that shape a timed cell (the bench rule), set by the
#: workflow for each cell and recorded as env.workflow_digest (mnistbench.core.provenance).
WORKFLOW_DIGEST_VAR = "MNISTBENCH_WORKFLOW_DIGEST"
