# The ONE file that pins what matters inside mlfleet's GPU image. An upgrade is a reviewed diff here,
# then `make ami ENV=dev`, `make ami-test ENV=dev`, and the roll-out described in docs/ami.md.
#
# Where the numbers come from:
# - nvidia_driver_version: the driver the Amazon ECS GPU-optimized AL2023 AMI release 20261113 ships
#   (github.com/aws/amazon-ecs-ami/releases/tag/20261113: "NVIDIA driver version: 580.178.04"). The base
#   AMI precompiles its kernel modules for this driver, so the build checks the base carries exactly this
#   version and fails early otherwise (bump it together with the base; see docs/ami.md).
# - cuda_version: cuda-toolkit-13-2 13.2.0 from the Amazon Linux 2023 NVIDIA repository (AL2023 release
#   notes 2023.10.20260330, "Nvidia Updated Packages": cuda-toolkit-13-2-13.2.0-1). CUDA 13.x runs on
#   R580 drivers.
# - nvidia_container_toolkit_version: nvidia-container-toolkit 1.19.0 from the same repository and
#   release notes (nvidia-container-toolkit-1.19.0-1).

nvidia_driver_version            = "580.178.04"
cuda_version                     = "13.2.0"
nvidia_container_toolkit_version = "1.19.0"
