from .gpu_ami import SOURCES, STOCK_GPU_AMI_PARAMETER, AmiChoice, GpuAmi, GpuAmiArgs, choose_ami

__all__ = ["SOURCES", "STOCK_GPU_AMI_PARAMETER", "AmiChoice", "GpuAmi", "GpuAmiArgs", "choose_ami"]
