"""dflashops: from a bare Proxmox VE GPU host to a tuned vLLM server with speculative decoding."""

__version__ = "0.1.0"
