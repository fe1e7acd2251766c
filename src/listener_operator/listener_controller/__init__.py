"""listener_controller"""
