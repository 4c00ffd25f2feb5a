"""assignments"""
