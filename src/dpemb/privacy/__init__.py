"""dpemb.privacy"""
