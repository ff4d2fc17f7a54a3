"""dpemb.training"""
