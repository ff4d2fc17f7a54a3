"""dpemb.algorithms"""
