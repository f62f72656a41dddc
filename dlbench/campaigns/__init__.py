"""Campaigns: result sets (measured by the pipeline, or published) with a manifest, compared
with stated confidence and followed over time. See docs/campaigns.md."""

from dlbench.campaigns.campaign import Campaign, load, save

__all__ = ["Campaign", "load", "save"]
