INSERT INTO `order_lines` (`order_id`, `line`, `sku`) VALUES
(1, 1, 'a'),
(1, 2, 'b')
ON DUPLICATE KEY UPDATE `sku` = VALUES(`sku`)
