from .gpu_ami import STOCK_GPU_AMI_PARAMETER, GpuAmi, GpuAmiArgs

__all__ = ["STOCK_GPU_AMI_PARAMETER", "GpuAmi", "GpuAmiArgs"]
