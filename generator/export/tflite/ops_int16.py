"""(placeholder: converters of this group are being written)"""
