"""dpemb.models"""
