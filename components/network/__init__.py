from .network import INTERFACE_ENDPOINT_SERVICES, Network, NetworkArgs

__all__ = ["INTERFACE_ENDPOINT_SERVICES", "Network", "NetworkArgs"]
