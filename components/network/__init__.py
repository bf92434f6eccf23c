from .image_cache import ImageCache, ImageCacheArgs
from .network import INTERFACE_ENDPOINT_SERVICES, Network, NetworkArgs, NetworkError, NetworkPlan, plan_network
from .service_calls import SERVICE_CALLS, ServiceCall, required_services

__all__ = [
    "INTERFACE_ENDPOINT_SERVICES",
    "SERVICE_CALLS",
    "ImageCache",
    "ImageCacheArgs",
    "Network",
    "NetworkArgs",
    "NetworkError",
    "NetworkPlan",
    "ServiceCall",
    "plan_network",
    "required_services",
]
