"""The ACE playbook: bullets per (tenant, task class), the atomic merge, injection."""
