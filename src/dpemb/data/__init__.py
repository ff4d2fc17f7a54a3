"""dpemb.data"""
