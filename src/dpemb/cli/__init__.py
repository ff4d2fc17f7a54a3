"""dpemb.cli"""
