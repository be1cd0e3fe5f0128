"""The CUDA bridge for Open-IOV: runs guest kernel jobs written as binary records (bridge/PROTOCOL.md)."""
