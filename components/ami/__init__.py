from .gpu_ami import STOCK_GPU_AMI_PARAMETER, AmiChoice, GpuAmi, GpuAmiArgs, choose_ami

__all__ = ["STOCK_GPU_AMI_PARAMETER", "AmiChoice", "GpuAmi", "GpuAmiArgs", "choose_ami"]
