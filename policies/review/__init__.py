"""Offline review: the pack's rules over a plan document, written up as reports."""
