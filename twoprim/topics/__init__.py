"""topics"""
