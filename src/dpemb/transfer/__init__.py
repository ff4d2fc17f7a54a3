"""dpemb.transfer"""
