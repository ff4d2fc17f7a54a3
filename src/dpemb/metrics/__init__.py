"""dpemb.metrics"""
